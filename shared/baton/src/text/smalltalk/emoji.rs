//! Emoji and emoticons in a message: which go with smalltalk (faces, hands, people, hearts, signs
//! of celebration) and which make it a request (food, objects, flags, symbols).

use unicode_properties::{GeneralCategoryGroup, UnicodeEmoji, UnicodeGeneralCategory};
use unicode_segmentation::UnicodeSegmentation;

/// Emoji outside the "Smileys & Emotion" and "People & Body" groups that go with smalltalk, by
/// their Unicode CLDR names: celebration and approval.
const CELEBRATION_EMOJI: &[&str] = &[
    "party popper",
    "confetti ball",
    "sparkles",
    "star",
    "glowing star",
    "fire",
    "rose",
    "bouquet",
    "rainbow",
    "sun",
    "check mark",
    "check mark button",
    "check box with check",
    "trophy",
    "heart suit",
    "ok button",
    "cool button",
    "four leaf clover",
    "cherry blossom",
    "sunflower",
    "tulip",
    "blossom",
    "balloon",
];

/// Faces and hands of those groups that point at or want something: "that one" (👉 ☝️), money
/// (🤑), food (😋 🤤). Matched in their CLDR names.
const WANTING_EMOJI: &[&str] = &["pointing", "money-mouth face", "face savoring food", "drooling face"];

/// ASCII emoticons, read as emoji.
const EMOTICONS: &[&str] =
    &[":-)", ":)", ":-D", ":D", ";-)", ";)", ":-P", ":P", ":p", "=)", "<3", ":(", ":-(", "^^", "^_^", ":3"];

/// `text` with its emoji and emoticons made spaces, and whether it had any; `None` if it has an
/// emoji that does not go with smalltalk or a symbol that is neither punctuation nor emoji.
pub(super) fn without_emoji(text: &str) -> Option<(String, bool)> {
    let mut emoji = false;
    let mut text = text.to_owned();
    for emoticon in EMOTICONS {
        if text.contains(emoticon) {
            emoji = true;
            text = text.replace(emoticon, " ");
        }
    }
    let mut rest = String::with_capacity(text.len());
    for grapheme in text.graphemes(true) {
        let first = grapheme.chars().next().unwrap_or(' ');
        let text = first.is_alphanumeric() || first.is_whitespace() || matches!(first, '\'' | '’' | '~');
        if text || first.general_category_group() == GeneralCategoryGroup::Punctuation {
            rest.push_str(grapheme);
        } else if is_smalltalk_emoji(grapheme) {
            emoji = true;
            rest.push(' ');
        } else {
            return None;
        }
    }
    Some((rest, emoji))
}

/// Whether the grapheme cluster is an emoji that goes with smalltalk: a face, a hand, a person,
/// a heart, or a sign of celebration; with any skin tone, as a ZWJ sequence or not.
fn is_smalltalk_emoji(grapheme: &str) -> bool {
    if !grapheme.chars().any(|c| c.is_emoji_char() && !c.is_ascii()) {
        return false;
    }
    let found = emojis::get(grapheme)
        .or_else(|| emojis::get(grapheme.trim_end_matches('\u{FE0F}')))
        .or_else(|| grapheme.chars().next().and_then(|c| emojis::get(c.encode_utf8(&mut [0; 4]))));
    found.is_some_and(|e| {
        let wants = WANTING_EMOJI.iter().any(|w| e.name().contains(w));
        let kind = matches!(e.group(), emojis::Group::SmileysAndEmotion | emojis::Group::PeopleAndBody);
        (kind && !wants) || CELEBRATION_EMOJI.iter().any(|name| e.name().eq_ignore_ascii_case(name))
    })
}

#[cfg(test)]
mod tests {
    use crate::text::{Smalltalk, classify_smalltalk as talk};

    #[test]
    fn faces_hands_and_hearts_are_acknowledgements_with_any_skin_tone_or_joiner() {
        for emoji in [
            "👍",
            "🙏",
            "❤️",
            "👌",
            "👍🏽",
            "🙏🙏!",
            "😂😂",
            "👨‍👩‍👧",
            "🤷🏽‍♀️",
            "🫶🏿",
            "🎉",
            "♥",
            "🆗",
            "✨",
            "?",
            "...",
            ":)",
        ] {
            assert_eq!(talk(emoji), Some(Smalltalk::Acknowledgement), "{emoji:?}");
        }
        assert_eq!(talk("thanks 👍"), Some(Smalltalk::Acknowledgement));
        assert_eq!(talk("hi 👋🏿"), Some(Smalltalk::Greeting));
    }

    #[test]
    fn an_emoji_of_a_thing_or_a_symbol_is_a_request() {
        for request in
            ["🧾?", "☕🍩", "💳", "🛒", "❓", "🇫🇷", "thanks 🧾", "42", "#1", "$", "thanks $5", "ok +"]
        {
            assert_eq!(talk(request), None, "{request:?}");
        }
    }
}
